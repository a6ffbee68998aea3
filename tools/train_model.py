#!/usr/bin/python3
"""Train the tiny GPT-2 shipped in assets/models/tiny-fortunes.

Everything runs on one CPU thread with plain torch:
  1. read the Debian `fortunes` files (plain text files only, not *.dat/*.u8),
  2. train a byte-level BPE tokenizer (GPT-2 pre-tokenizer regex, GPT-2 byte order),
  3. train a small GPT-2 (pre-LN, causal MHA, gelu_new MLP, tied head, learned
     absolute positions initialised with sinusoids whose frequencies run from pi
     down to pi/P; layer 0 head 0 starts with a shift-by-one query/key map, so a
     previous-token head exists from the start; every training window carries a
     random span of ids repeated later in the window, from which layer 1 learns
     induction heads after a plateau of about 2000 steps),
  4. write config.json / model.safetensors (F16) / vocab.json / merges.txt /
     train_log.txt in the Hugging Face GPT-2 layout.

Head-role scores (printed periodically and at the end) follow the definitions
the C++ side recomputes: prev-token, first-token, mean entropy on 8 fixed
English sentences; induction and duplicate-token on 8 sequences r+r of
R = 20 hashed token ids.

Usage:
  /usr/bin/python3 tools/train_model.py --out assets/models/tiny-fortunes [--steps N] [--resume]
"""
import os
import sys

# --threads N (default 1) must be known before torch starts its thread pools.
THREADS = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 1
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
os.environ.setdefault("MKL_NUM_THREADS", str(THREADS))

import argparse
import heapq
import json
import math
import struct
import time
from collections import Counter, defaultdict

import numpy as np
import regex
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(THREADS)
torch.set_num_interop_threads(1)

FORTUNE_DIR = "/usr/share/games/fortunes"
# ascii-art is pictures, not prose; everything else is read.
EXCLUDED_FILES = {"ascii-art"}
GPT2_PAT = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
EOT = "<|endoftext|>"

PROBE_SENTENCES = [
    "The cat sat on the mat and looked at the door.",
    "When Mary and John went to the store, John gave a drink to Mary.",
    "A journey of a thousand miles begins with a single step.",
    "The quick brown fox jumps over the lazy dog.",
    "I think that the answer to the question is in the book on the table.",
    "She said that she would come back tomorrow, but she never did.",
    "Time flies like an arrow; fruit flies like a banana.",
    "Every morning the old man walked to the river and watched the boats.",
]
PROBE_R = 20
PROBE_SEQS = 8

# Copy accuracy: ordinary English sentences written for this measurement (none is from the
# fortunes), each fed as `s + " " + s`; the score is the fraction of the second copy's positions
# whose top-1 next token is the token that follows (the position before the second copy, whose
# next token cannot be known, is not counted).
COPY_SENTENCES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "copy_sentences.txt")


# ----------------------------------------------------------------------------
# logging
# ----------------------------------------------------------------------------
class Log:
    def __init__(self):
        self.f = None

    def open(self, path, append):
        self.f = open(path, "a" if append else "w", encoding="utf-8")

    def __call__(self, *a):
        s = " ".join(str(x) for x in a)
        print(s, flush=True)
        if self.f:
            self.f.write(s + "\n")
            self.f.flush()


log = Log()


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def read_fortunes():
    """All fortunes from the plain files, in sorted file order, as strings."""
    docs = []
    names = sorted(n for n in os.listdir(FORTUNE_DIR)
                   if not n.endswith((".dat", ".u8")) and n not in EXCLUDED_FILES)
    for name in names:
        path = os.path.join(FORTUNE_DIR, name)
        if not os.path.isfile(path):
            continue
        raw = open(path, "rb").read().decode("utf-8", errors="replace")
        raw = regex.sub(r".\x08", "", raw)  # remove overstriking (x BS x, _ BS x)
        cur = []
        for line in raw.split("\n"):
            if line.strip() == "%":
                t = "\n".join(cur).strip("\n").rstrip()
                if t.strip():
                    docs.append(t)
                cur = []
            else:
                cur.append(line.rstrip())
        t = "\n".join(cur).strip("\n").rstrip()
        if t.strip():
            docs.append(t)
    return names, docs


# ----------------------------------------------------------------------------
# byte-level BPE (GPT-2 conventions)
# ----------------------------------------------------------------------------
def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1))
          + list(range(ord("\xae"), ord("\xff") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return bs, [chr(c) for c in cs]


BYTE_ORDER, BYTE_CHARS = bytes_to_unicode()          # id i <-> byte BYTE_ORDER[i]
BYTE_TO_ID = {b: i for i, b in enumerate(BYTE_ORDER)}
BYTE_ENCODER = {b: c for b, c in zip(BYTE_ORDER, BYTE_CHARS)}


class Tokenizer:
    def __init__(self, merges):
        # merges: list of (a_id, b_id); merge k creates id 256 + k
        self.merges = merges
        self.ranks = {p: k for k, p in enumerate(merges)}
        self.strs = [BYTE_ENCODER[b] for b in BYTE_ORDER]
        for a, b in merges:
            self.strs.append(self.strs[a] + self.strs[b])
        self.eot = len(self.strs)
        self.strs.append(EOT)
        self.cache = {}

    @property
    def vocab_size(self):
        return len(self.strs)

    def encode_word(self, w):
        ids = self.cache.get(w)
        if ids is not None:
            return ids
        ids = [BYTE_TO_ID[b] for b in w.encode("utf-8")]
        while len(ids) > 1:
            best, bi = None, -1
            for i in range(len(ids) - 1):
                r = self.ranks.get((ids[i], ids[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            pair = (ids[bi], ids[bi + 1])
            out, i = [], 0
            while i < len(ids):
                if i < len(ids) - 1 and (ids[i], ids[i + 1]) == pair:
                    out.append(256 + best)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            ids = out
        self.cache[w] = ids
        return ids

    def encode(self, text):
        out = []
        for w in GPT2_PAT.findall(text):
            out.extend(self.encode_word(w))
        return out

    def decode(self, ids):
        inv = {c: b for b, c in BYTE_ENCODER.items()}
        s = "".join(self.strs[i] for i in ids)
        return bytearray(inv[c] for c in s if c in inv).decode("utf-8", errors="replace")


def train_bpe(docs, n_merges):
    counts = Counter()
    for d in docs:
        counts.update(GPT2_PAT.findall(d))
    words = []
    freqs = []
    for w, c in sorted(counts.items()):
        words.append([BYTE_TO_ID[b] for b in w.encode("utf-8")])
        freqs.append(c)
    pair_count = defaultdict(int)
    where = defaultdict(set)
    for wi, ids in enumerate(words):
        f = freqs[wi]
        for p in zip(ids, ids[1:]):
            pair_count[p] += f
            where[p].add(wi)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    strs = [BYTE_ENCODER[b] for b in BYTE_ORDER]
    known = set(strs)
    merges = []
    banned = set()
    while len(merges) < n_merges and heap:
        negc, p = heapq.heappop(heap)
        c = pair_count.get(p, 0)
        if c <= 0 or -negc != c or p in banned:
            continue
        s = strs[p[0]] + strs[p[1]]
        if s in known:   # same string reachable by another split: keep ids unique
            banned.add(p)
            continue
        new = len(strs)
        strs.append(s)
        known.add(s)
        merges.append(p)
        changed = set()
        for wi in list(where[p]):
            ids = words[wi]
            f = freqs[wi]
            out, i, hit = [], 0, False
            while i < len(ids):
                if i < len(ids) - 1 and ids[i] == p[0] and ids[i + 1] == p[1]:
                    out.append(new)
                    i += 2
                    hit = True
                else:
                    out.append(ids[i])
                    i += 1
            if not hit:
                continue
            for q in zip(ids, ids[1:]):
                pair_count[q] -= f
                changed.add(q)
            for q in zip(out, out[1:]):
                pair_count[q] += f
                where[q].add(wi)
                changed.add(q)
            words[wi] = out
        for q in changed:
            if pair_count[q] > 0 and q not in banned:
                heapq.heappush(heap, (-pair_count[q], q))
    return merges


def write_tokenizer(tok, out):
    vocab = {s: i for i, s in enumerate(tok.strs)}
    assert len(vocab) == len(tok.strs), "duplicate token strings"
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in tok.merges:
            f.write(f"{tok.strs[a]} {tok.strs[b]}\n")


def write_tokenizer_json(tok, out):
    """The same tokenizer as a Hugging Face tokenizer.json: byte-level BPE with GPT-2's pre-tokenizer."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": tok.eot, "content": EOT, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "vocab": {s: i for i, s in enumerate(tok.strs)},
                  "merges": [f"{tok.strs[a]} {tok.strs[b]}" for a, b in tok.merges]},
    }
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)


def gpt2_reference_encode(text, vocab_path, merges_path):
    """Independent reimplementation of GPT-2's encoder.py bpe() reading the files."""
    encoder = json.load(open(vocab_path, encoding="utf-8"))
    lines = open(merges_path, encoding="utf-8").read().split("\n")
    assert lines[0].startswith("#version")
    bpe_ranks = {tuple(l.split()): i for i, l in enumerate(x for x in lines[1:] if x)}
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(2 ** 8):
        if b not in bs:
            bs.append(b)
            cs.append(2 ** 8 + n)
            n += 1
    byte_encoder = dict(zip(bs, [chr(c) for c in cs]))

    def get_pairs(word):
        return set(zip(word, word[1:]))

    def bpe(token):
        word = tuple(token)
        pairs = get_pairs(word)
        if not pairs:
            return token
        while True:
            bigram = min(pairs, key=lambda pair: bpe_ranks.get(pair, float("inf")))
            if bigram not in bpe_ranks:
                break
            first, second = bigram
            new_word = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                    new_word.extend(word[i:j])
                    i = j
                except ValueError:
                    new_word.extend(word[i:])
                    break
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
            pairs = get_pairs(word)
        return " ".join(word)

    ids = []
    for token in regex.findall(GPT2_PAT, text):
        token = "".join(byte_encoder[b] for b in token.encode("utf-8"))
        ids.extend(encoder[t] for t in bpe(token).split(" "))
    return ids


# ----------------------------------------------------------------------------
# model (HF GPT-2 semantics; Conv1D weights stored [in, out])
# ----------------------------------------------------------------------------
def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Conv1D(nn.Module):
    def __init__(self, nin, nout, std):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nin, nout) * std)
        self.bias = nn.Parameter(torch.zeros(nout))

    def forward(self, x):
        return x @ self.weight + self.bias


class Attn(nn.Module):
    def __init__(self, C, H, std, proj_std, attn_std):
        super().__init__()
        self.H = H
        self.c_attn = Conv1D(C, 3 * C, attn_std)
        self.c_proj = Conv1D(C, C, proj_std)

    def forward(self, x, want_w=False):
        B, T, C = x.shape
        H = self.H
        hd = C // H
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, H, hd).transpose(1, 2)
        k = k.view(B, T, H, hd).transpose(1, 2)
        v = v.view(B, T, H, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf"))
        w = torch.softmax(att, dim=-1)
        y = (w @ v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y), (w if want_w else None)


class MLP(nn.Module):
    def __init__(self, C, inner, std, proj_std):
        super().__init__()
        self.c_fc = Conv1D(C, inner, std)
        self.c_proj = Conv1D(inner, C, proj_std)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, C, H, inner, std, proj_std, attn_std):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = Attn(C, H, std, proj_std, attn_std)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = MLP(C, inner, std, proj_std)

    def forward(self, x, want_w=False):
        a, w = self.attn(self.ln_1(x), want_w)
        x = x + a
        x = x + self.mlp(self.ln_2(x))
        return x, w


class GPT(nn.Module):
    def __init__(self, V, P, C, L, H, inner, pos_init, pos_scale, attn_std=0.02, pos_freq="base"):
        super().__init__()
        std = 0.02
        proj_std = 0.02 / math.sqrt(2 * L)
        self.wte = nn.Parameter(torch.randn(V, C) * std)
        if pos_init == "sin":
            pos = torch.arange(P, dtype=torch.float32)[:, None]
            i = torch.arange(C // 2, dtype=torch.float32)[None, :]
            omega = None
            if pos_freq == "pi":
                # frequencies geometric from pi (period 2) down to pi/P (period 2P)
                omega = math.pi * (1.0 / P) ** (i / (C // 2 - 1))
            else:
                omega = 1.0 / (10000.0 ** (2 * i / C))
            omega = omega.reshape(-1)
            ang = pos * omega[None, :]
            pe = torch.zeros(P, C)
            pe[:, 0::2] = torch.sin(ang)
            pe[:, 1::2] = torch.cos(ang)
            # every row has norm sqrt(C/2); scale it to pos_scale x the token-embedding norm
            pe = pe / math.sqrt(C / 2) * (std * math.sqrt(C)) * pos_scale
            self.wpe = nn.Parameter(pe)
        else:
            self.wpe = nn.Parameter(torch.randn(P, C) * std)
        self.h = nn.ModuleList([Block(C, H, inner, std, proj_std, attn_std) for _ in range(L)])
        self.pos_omega = omega if pos_init == "sin" else None
        self.ln_f = nn.LayerNorm(C, eps=1e-5)

    @torch.no_grad()
    def seed_prev_token_head(self, gain):
        """Initialise layer 0 head 0's query/key maps as a shift-by-one relation between the
        sinusoidal position components (query rotated back by one step): q_i . k_j is largest
        at j = i - 1. Value/output maps stay random; everything is trained afterwards."""
        C = self.wte.shape[1]
        hd = C // self.h[0].attn.H
        W = self.h[0].attn.c_attn.weight
        om = self.pos_omega
        W[:, :hd] = 0
        W[:, C:C + hd] = 0
        for m in range(hd // 2):
            k = m  # highest frequencies first
            c, s_ = math.cos(om[k]), math.sin(om[k])
            # key: (sin, cos) of position j
            W[2 * k, C + 2 * m] = gain
            W[2 * k + 1, C + 2 * m + 1] = gain
            # query: (sin, cos) of position i - 1 from (sin, cos) of position i
            W[2 * k, 2 * m] = gain * c
            W[2 * k + 1, 2 * m] = -gain * s_
            W[2 * k, 2 * m + 1] = gain * s_
            W[2 * k + 1, 2 * m + 1] = gain * c

    @property
    def max_positions(self):
        return self.wpe.shape[0]

    def forward(self, idx, want_w=False):
        B, T = idx.shape
        x = self.wte[idx] + self.wpe[:T][None]
        ws = []
        for blk in self.h:
            x, w = blk(x, want_w)
            ws.append(w)
        x = self.ln_f(x)
        logits = x @ self.wte.t()
        return logits, ws

    def hf_state(self):
        sd = {"transformer.wte.weight": self.wte, "transformer.wpe.weight": self.wpe}
        for i, b in enumerate(self.h):
            p = f"transformer.h.{i}."
            sd[p + "ln_1.weight"] = b.ln_1.weight
            sd[p + "ln_1.bias"] = b.ln_1.bias
            sd[p + "attn.c_attn.weight"] = b.attn.c_attn.weight
            sd[p + "attn.c_attn.bias"] = b.attn.c_attn.bias
            sd[p + "attn.c_proj.weight"] = b.attn.c_proj.weight
            sd[p + "attn.c_proj.bias"] = b.attn.c_proj.bias
            sd[p + "ln_2.weight"] = b.ln_2.weight
            sd[p + "ln_2.bias"] = b.ln_2.bias
            sd[p + "mlp.c_fc.weight"] = b.mlp.c_fc.weight
            sd[p + "mlp.c_fc.bias"] = b.mlp.c_fc.bias
            sd[p + "mlp.c_proj.weight"] = b.mlp.c_proj.weight
            sd[p + "mlp.c_proj.bias"] = b.mlp.c_proj.bias
        sd["transformer.ln_f.weight"] = self.ln_f.weight
        sd["transformer.ln_f.bias"] = self.ln_f.bias
        return {k: v.detach() for k, v in sd.items()}

    def load_hf_state(self, sd):
        own = self.hf_state()
        for k, v in own.items():
            v.copy_(sd[k].to(v.dtype))


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class LlamaAttn(nn.Module):
    """Hugging Face LlamaAttention without a cache: q, k, v projections (nn.Linear, [out, in]), the
    rotary embedding on q and k (rotate_half), G key/value heads each read by H/G query heads."""

    def __init__(self, C, H, G, hd, theta, std, proj_std):
        super().__init__()
        self.H, self.G, self.hd = H, G, hd
        self.q_proj = nn.Parameter(torch.randn(H * hd, C) * std)
        self.k_proj = nn.Parameter(torch.randn(G * hd, C) * std)
        self.v_proj = nn.Parameter(torch.randn(G * hd, C) * std)
        self.o_proj = nn.Parameter(torch.randn(C, H * hd) * proj_std)
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))

    def forward(self, x, want_w=False):
        B, T, C = x.shape
        H, G, hd = self.H, self.G, self.hd
        q = (x @ self.q_proj.t()).view(B, T, H, hd).transpose(1, 2)
        k = (x @ self.k_proj.t()).view(B, T, G, hd).transpose(1, 2)
        v = (x @ self.v_proj.t()).view(B, T, G, hd).transpose(1, 2)
        freqs = torch.arange(T, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // G, dim=1)  # the training side may copy; the engine does not
        v = v.repeat_interleave(H // G, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf"))
        w = torch.softmax(att, dim=-1)
        y = (w @ v).transpose(1, 2).reshape(B, T, H * hd)
        return y @ self.o_proj.t(), (w if want_w else None)


class LlamaBlock(nn.Module):
    def __init__(self, C, H, G, hd, inner, theta, eps, std, proj_std):
        super().__init__()
        self.input_layernorm = RMSNorm(C, eps)
        self.attn = LlamaAttn(C, H, G, hd, theta, std, proj_std)
        self.post_attention_layernorm = RMSNorm(C, eps)
        self.gate_proj = nn.Parameter(torch.randn(inner, C) * std)
        self.up_proj = nn.Parameter(torch.randn(inner, C) * std)
        self.down_proj = nn.Parameter(torch.randn(C, inner) * proj_std)

    def forward(self, x, want_w=False):
        a, w = self.attn(self.input_layernorm(x), want_w)
        x = x + a
        h = self.post_attention_layernorm(x)
        x = x + (F.silu(h @ self.gate_proj.t()) * (h @ self.up_proj.t())) @ self.down_proj.t()
        return x, w


class Llama(nn.Module):
    """Hugging Face LlamaForCausalLM: token embedding, pre-RMSNorm blocks with rotary positions,
    grouped-query attention and a SwiGLU MLP, final RMSNorm, LM head tied to the embedding."""

    def __init__(self, V, P, C, L, H, G, inner, theta=10000.0, eps=1e-5):
        super().__init__()
        std = 0.02
        proj_std = 0.02 / math.sqrt(2 * L)
        self.P, self.theta, self.eps, self.inner = P, theta, eps, inner
        self.wte = nn.Parameter(torch.randn(V, C) * std)
        self.h = nn.ModuleList([LlamaBlock(C, H, G, C // H, inner, theta, eps, std, proj_std) for _ in range(L)])
        self.norm = RMSNorm(C, eps)

    @property
    def max_positions(self):
        return self.P

    def forward(self, idx, want_w=False):
        x = self.wte[idx]
        ws = []
        for blk in self.h:
            x, w = blk(x, want_w)
            ws.append(w)
        return self.norm(x) @ self.wte.t(), ws

    def hf_state(self):
        sd = {"model.embed_tokens.weight": self.wte, "model.norm.weight": self.norm.weight}
        for i, b in enumerate(self.h):
            p = f"model.layers.{i}."
            sd[p + "input_layernorm.weight"] = b.input_layernorm.weight
            sd[p + "self_attn.q_proj.weight"] = b.attn.q_proj
            sd[p + "self_attn.k_proj.weight"] = b.attn.k_proj
            sd[p + "self_attn.v_proj.weight"] = b.attn.v_proj
            sd[p + "self_attn.o_proj.weight"] = b.attn.o_proj
            sd[p + "post_attention_layernorm.weight"] = b.post_attention_layernorm.weight
            sd[p + "mlp.gate_proj.weight"] = b.gate_proj
            sd[p + "mlp.up_proj.weight"] = b.up_proj
            sd[p + "mlp.down_proj.weight"] = b.down_proj
        return {k: v.detach() for k, v in sd.items()}

    def load_hf_state(self, sd):
        for k, v in self.hf_state().items():
            v.copy_(sd[k].to(v.dtype))

    def hf_config(self, V, eot):
        b = self.h[0].attn
        return {
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "vocab_size": V,
            "hidden_size": self.wte.shape[1],
            "intermediate_size": self.inner,
            "num_hidden_layers": len(self.h),
            "num_attention_heads": b.H,
            "num_key_value_heads": b.G,
            "head_dim": b.hd,
            "hidden_act": "silu",
            "max_position_embeddings": self.P,
            "rms_norm_eps": self.eps,
            "rope_theta": self.theta,
            "rope_scaling": None,
            "attention_bias": False,
            "mlp_bias": False,
            "tie_word_embeddings": True,
            "bos_token_id": eot,
            "eos_token_id": eot,
            "torch_dtype": "float16",
        }


# ----------------------------------------------------------------------------
# safetensors (written and read by hand)
# ----------------------------------------------------------------------------
def write_safetensors(path, tensors, dtype="F16"):
    np_dtype = {"F16": np.float16, "F32": np.float32}[dtype]
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        a = tensors[name].cpu().float().numpy().astype(np_dtype)
        b = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = {"F16": "<f2", "F32": "<f4", "BF16": None}[info["dtype"]]
        s, e = info["data_offsets"]
        a = np.frombuffer(data[base + s:base + e], dtype=dt).reshape(info["shape"])
        out[name] = torch.from_numpy(a.astype(np.float32))
    return header, out


# ----------------------------------------------------------------------------
# head roles (exact definitions shared with the C++ tool)
# ----------------------------------------------------------------------------
def probe_random_seqs(V):
    seqs = []
    for s in range(PROBE_SEQS):
        r = [((s * PROBE_R + p + 1) * 2654435761) % 4294967296 % (V - 1) for p in range(PROBE_R)]
        seqs.append(r + r)
    return seqs


@torch.no_grad()
def head_roles(model, tok):
    L = len(model.h)
    H = model.h[0].attn.H
    prev = np.zeros((L, H))
    first = np.zeros((L, H))
    ent = np.zeros((L, H))
    ind = np.zeros((L, H))
    dup = np.zeros((L, H))
    for sent in PROBE_SENTENCES:
        ids = tok.encode(sent)
        _, ws = model(torch.tensor([ids]), want_w=True)
        T = len(ids)
        for l in range(L):
            w = ws[l][0].double()  # H, T, T
            i = torch.arange(1, T)
            prev[l] += w[:, i, i - 1].mean(-1).numpy()
            first[l] += w[:, i, 0].mean(-1).numpy()
            rows = w[:, 1:, :]
            e = -(rows * torch.log(rows.clamp_min(1e-30))).sum(-1)  # 0*log0 = 0
            ent[l] += e.mean(-1).numpy()
    n = len(PROBE_SENTENCES)
    prev /= n
    first /= n
    ent /= n
    R = PROBE_R
    seqs = probe_random_seqs(tok.vocab_size)
    icl_loss = 0.0
    for x in seqs:
        logits, ws = model(torch.tensor([x]), want_w=True)
        i = torch.arange(R, 2 * R)
        for l in range(L):
            w = ws[l][0].double()
            ind[l] += w[:, i, i - R + 1].mean(-1).numpy()
            dup[l] += w[:, i, i - R].mean(-1).numpy()
        # loss on predicting the second copy (positions R..2R-2 predict R+1..2R-1)
        lp = F.log_softmax(logits[0, R:2 * R - 1].double(), -1)
        icl_loss += -lp[torch.arange(R - 1), torch.tensor(x[R + 1:2 * R])].mean().item()
    ind /= len(seqs)
    dup /= len(seqs)
    return dict(prev=prev, first=first, ent=ent, ind=ind, dup=dup, icl_loss=icl_loss / len(seqs))


def format_roles(r):
    L, H = r["prev"].shape
    lines = ["| layer | head | prev-token | first-token | induction | duplicate-token | mean entropy (nats) |",
             "|------:|-----:|-----------:|------------:|----------:|----------------:|--------------------:|"]
    for l in range(L):
        for h in range(H):
            lines.append(f"| {l} | {h} | {r['prev'][l, h]:.3f} | {r['first'][l, h]:.3f} | "
                         f"{r['ind'][l, h]:.3f} | {r['dup'][l, h]:.3f} | {r['ent'][l, h]:.3f} |")
    lines.append(f"max prev-token {r['prev'].max():.3f}  max induction {r['ind'].max():.3f}  "
                 f"loss on 2nd copy of r+r {r['icl_loss']:.3f}")
    return "\n".join(lines)


def short_roles(r):
    L, H = r["prev"].shape
    s = []
    for l in range(L):
        s.append(f"L{l} prev[" + " ".join(f"{v:.2f}" for v in r["prev"][l]) + "] ind["
                 + " ".join(f"{v:.2f}" for v in r["ind"][l]) + "]")
    return "  ".join(s) + f"  icl {r['icl_loss']:.2f}"


# ----------------------------------------------------------------------------
# batches
# ----------------------------------------------------------------------------
TEXT_SEPARATORS = [" ", " ", " ", "\n", "\n\n", "  ", " -- ", "; "]


def text_repeat_window(data, snippets, tok, rng, T):
    """A window of the token stream into which a run of 1-3 consecutive training snippets s is
    written as text, s + sep + s (sometimes with another snippet between the copies, sometimes a
    third copy), tokenised as a whole so the second copy's first word has its leading space the
    way a repeated sentence has it."""
    i = int(rng.integers(0, len(snippets) - 3))
    s = " ".join(snippets[i:i + int(rng.integers(1, 4))])
    sep = TEXT_SEPARATORS[int(rng.integers(0, len(TEXT_SEPARATORS)))]
    r = rng.random()
    if r < 0.2:
        mid = snippets[int(rng.integers(0, len(snippets)))]
        text = s + " " + mid + sep + s
    elif r < 0.3:
        text = s + sep + s + sep + s
    else:
        text = s + sep + s
    ids = np.array(tok.encode(text), dtype=np.int64)[:T + 1]
    pre = int(rng.integers(0, T + 2 - len(ids)))
    s0 = int(rng.integers(0, len(data) - T - 1))
    x = data[s0:s0 + T + 1].copy()
    x[pre:pre + len(ids)] = ids
    return x


def make_batch(data, step, args, V, snippets=None, tok=None):
    """Deterministic batch for a step: windows of the token stream; a fraction get a
    span repeated later in the window (text span or random ids), a fraction a text snippet
    repeated as text."""
    rng = np.random.default_rng([args.seed, step])
    T = args.seq_len
    xs = np.empty((args.batch, T + 1), dtype=np.int64)
    rep_frac = args.rep_frac if step >= args.rep_start else 0.0
    pure_frac = args.pure_frac if step >= args.rep_start else 0.0
    for b in range(args.batch):
        s0 = int(rng.integers(0, len(data) - T - 1))
        x = data[s0:s0 + T + 1].copy()
        if snippets and rng.random() < args.text_rep_frac:
            x = text_repeat_window(data, snippets, tok, rng, T)
        elif rng.random() < pure_frac:
            # a random id sequence r (rep_min..rep_max ids) tiled over the whole window
            Lr = int(rng.integers(args.rep_min, args.rep_max + 1))
            r = rng.integers(0, V - 1, Lr)
            x = np.tile(r, (T + 1) // Lr + 1)[:T + 1]
        elif rng.random() < rep_frac:
            Lr = int(rng.integers(args.rep_min, args.rep_max + 1))
            s = int(rng.integers(0, T + 1 - 2 * Lr + 1))
            d = int(rng.integers(s + Lr, T + 1 - Lr + 1))
            if rng.random() < args.rep_random:
                r = rng.integers(0, V - 1, Lr)
                x[s:s + Lr] = r
                x[d:d + Lr] = r
            else:
                x[d:d + Lr] = x[s:s + Lr]
        xs[b] = x
    t = torch.from_numpy(xs)
    return t[:, :-1], t[:, 1:]


@torch.no_grad()
def evaluate(model, data, args, n_batches=8):
    model.eval()
    rng = np.random.default_rng([args.seed, 999999])
    T = args.seq_len
    tot = 0.0
    for _ in range(n_batches):
        starts = rng.integers(0, len(data) - T - 1, args.batch)
        xs = torch.from_numpy(np.stack([data[s:s + T + 1] for s in starts]).astype(np.int64))
        logits, _ = model(xs[:, :-1])
        tot += F.cross_entropy(logits.reshape(-1, logits.size(-1)), xs[:, 1:].reshape(-1)).item()
    model.train()
    return tot / n_batches


def read_copy_sentences(path=COPY_SENTENCES_FILE):
    return [l.strip() for l in open(path, encoding="utf-8") if l.strip() and not l.startswith("#")]


@torch.no_grad()
def copy_accuracy(model, tok, sentences):
    """Pooled over the sentences: of the positions inside the second copy of `s + " " + s`, the
    fraction whose top-1 next token is the token that follows; also the mean probability given to
    that token."""
    model.eval()
    hit = n = 0
    p_sum = 0.0
    for s in sentences:
        n1 = len(tok.encode(s))
        ids = tok.encode(s + " " + s)
        logits, _ = model(torch.tensor([ids]))
        p = torch.softmax(logits[0].double(), -1)
        for i in range(n1, len(ids) - 1):
            hit += int(int(p[i].argmax()) == ids[i + 1])
            p_sum += float(p[i, ids[i + 1]])
            n += 1
    model.train()
    return hit / max(1, n), p_sum / max(1, n), n


SAMPLE_PROMPTS = ["The old man", "Love is", "A computer", "the quick brown fox jumps over the lazy dog. the quick"]


@torch.no_grad()
def sample(model, tok, prompt, n=40, seed=0):
    """Continuation drawn token by token from the softmax (temperature 0.8, fixed seed)."""
    g = torch.Generator().manual_seed(seed)
    ids = tok.encode(prompt)
    P = model.max_positions
    for _ in range(n):
        logits, _ = model(torch.tensor([ids[-P:]]))
        p = torch.softmax(logits[0, -1].double() / 0.8, -1)
        nxt = int(torch.multinomial(p, 1, generator=g))
        if nxt == tok.eot:
            break
        ids.append(nxt)
    return tok.decode(ids)


def split_snippets(docs, tok, lo=4, hi=40):
    """Sentences and lines of the training fortunes, 4-40 tokens long, for text repeats."""
    out = []
    for d in docs:
        for part in regex.split(r"(?<=[.!?])\s+|\n+", d):
            part = " ".join(part.split())
            if part and lo <= len(tok.encode(part)) <= hi:
                out.append(part)
    return out


# ----------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--ckpt-dir", default="/tmp/train/ckpt")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--steps", type=int, default=8000)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--merges", type=int, default=1500)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--n-positions", type=int, default=256)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--pos-init", choices=["sin", "normal"], default="sin")
    ap.add_argument("--pos-scale", type=float, default=1.0)
    ap.add_argument("--pos-freq", choices=["base", "pi"], default="pi",
                    help="sinusoid frequencies: 1/10000^(2i/C) or geometric from pi to pi/P")
    ap.add_argument("--seed-prev-head", type=float, default=1.5,
                    help="if > 0: gain of a shift-by-one q/k initialisation of layer 0 head 0")
    ap.add_argument("--attn-std", type=float, default=0.02, help="init std of c_attn (q, k, v) weights")
    ap.add_argument("--rep-frac", type=float, default=1.0)
    ap.add_argument("--rep-start", type=int, default=0)
    ap.add_argument("--pure-frac", type=float, default=0.0,
                    help="fraction of windows replaced by a random id sequence repeated over the window")
    ap.add_argument("--rep-random", type=float, default=1.0,
                    help="fraction of repeated spans made of random ids (rest: copied text)")
    ap.add_argument("--text-rep-frac", type=float, default=0.0,
                    help="fraction of windows holding a training sentence repeated as text (s + sep + s)")
    ap.add_argument("--rep-min", type=int, default=6)
    ap.add_argument("--rep-max", type=int, default=24)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--ckpt-every", type=int, default=250)
    ap.add_argument("--time-limit", type=float, default=0, help="stop after this many seconds (0: none)")
    ap.add_argument("--no-export", action="store_true")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads torch uses")
    ap.add_argument("--family", choices=["gpt2", "llama"], default="gpt2",
                    help="gpt2: GPT2LMHeadModel; llama: LlamaForCausalLM (RMSNorm, RoPE, SwiGLU, GQA)")
    ap.add_argument("--n-kv-head", type=int, default=2, help="llama: key/value heads (GQA)")
    ap.add_argument("--intermediate-size", type=int, default=352, help="llama: SwiGLU width")
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.ckpt_dir, exist_ok=True)
    ckpt_path = os.path.join(args.ckpt_dir, "ckpt.pt")
    resuming = args.resume and os.path.exists(ckpt_path)
    log.open(os.path.join(args.out, "train_log.txt"), append=resuming)
    log("command:", "/usr/bin/python3 " + " ".join(sys.argv))
    log("torch", torch.__version__, "threads", torch.get_num_threads(), "resume" if resuming else "fresh")
    t_start = time.time()

    torch.manual_seed(args.seed)
    names, docs = read_fortunes()
    val_docs = docs[::20]
    train_docs = [d for i, d in enumerate(docs) if i % 20 != 0]
    log(f"fortunes: {len(names)} files, {len(docs)} fortunes ({len(train_docs)} train, {len(val_docs)} val), "
        f"{sum(len(d) for d in docs)} chars")

    t0 = time.time()
    merges = train_bpe(train_docs, args.merges)
    tok = Tokenizer(merges)
    V = tok.vocab_size
    log(f"BPE: {len(merges)} merges, vocab {V} (eot id {tok.eot}), {time.time() - t0:.1f}s")

    def stream(ds):
        out = []
        for d in ds:
            out.extend(tok.encode(d))
            out.append(tok.eot)
        return np.array(out, dtype=np.int64)

    t0 = time.time()
    train = stream(train_docs)
    val = stream(val_docs)
    log(f"tokens: train {len(train)}, val {len(val)} ({time.time() - t0:.1f}s)")
    snippets = split_snippets(train_docs, tok) if args.text_rep_frac > 0 else None
    if snippets:
        log(f"text repeats: {len(snippets)} training sentences, {args.text_rep_frac:.2f} of the windows")
    copy_sents = read_copy_sentences()

    inner = 4 * args.n_embd
    if args.family == "llama":
        inner = args.intermediate_size

    def build(fresh):
        if args.family == "llama":
            return Llama(V, args.n_positions, args.n_embd, args.n_layer, args.n_head, args.n_kv_head, inner,
                         args.rope_theta)
        if fresh:
            return GPT(V, args.n_positions, args.n_embd, args.n_layer, args.n_head, inner,
                       args.pos_init, args.pos_scale, args.attn_std, args.pos_freq)
        return GPT(V, args.n_positions, args.n_embd, args.n_layer, args.n_head, inner, "normal", 1.0)

    model = build(True)
    if args.seed_prev_head > 0 and args.family == "gpt2":
        model.seed_prev_token_head(args.seed_prev_head)
    n_params = sum(p.numel() for p in model.parameters())
    n_embedding = sum(p.numel() for n, p in model.named_parameters() if n in ("wte", "wpe"))
    log(f"model: {args.family} L={args.n_layer} H={args.n_head} "
        + (f"G={args.n_kv_head} " if args.family == "llama" else "")
        + f"C={args.n_embd} P={args.n_positions} V={V} params {n_params} (non-embedding {n_params - n_embedding})")

    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and n not in ("wte", "wpe")]
    nodecay = [p for n, p in model.named_parameters() if not (p.dim() == 2 and n not in ("wte", "wpe"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)

    step = 0
    elapsed_before = 0.0
    if resuming:
        ck = torch.load(ckpt_path)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step = ck["step"]
        elapsed_before = ck["elapsed"]
        torch.set_rng_state(ck["torch_rng"])
        log(f"resumed from {ckpt_path} at step {step}")

    def lr_at(s):
        if s < args.warmup:
            return args.lr * (s + 1) / args.warmup
        p = (s - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))

    def save_ckpt():
        tmp = ckpt_path + ".tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "elapsed": elapsed_before + time.time() - t_train, "torch_rng": torch.get_rng_state(),
                    "args": vars(args)}, tmp)
        os.replace(tmp, ckpt_path)

    t_train = time.time()
    r = head_roles(model, tok)
    log(f"step {step} roles: {short_roles(r)}")
    ema = None
    model.train()
    while step < args.steps:
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        x, y = make_batch(train, step, args, V, snippets, tok)
        logits, _ = model(x)
        loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        el = elapsed_before + time.time() - t_train
        if step % args.eval_every == 0 or step == args.steps:
            vl = evaluate(model, val, args)
            r = head_roles(model, tok)
            ca, cp, _ = copy_accuracy(model, tok, copy_sents)
            log(f"step {step} loss {loss.item():.3f} ema {ema:.3f} val {vl:.3f} copy {ca:.3f} (p {cp:.2f}) "
                f"lr {lr_at(step - 1):.2e} t {el:.0f}s | {short_roles(r)}")
        elif step % 20 == 0:
            log(f"step {step} loss {loss.item():.3f} ema {ema:.3f} lr {lr_at(step - 1):.2e} t {el:.0f}s")
        if step % args.ckpt_every == 0:
            save_ckpt()
        if args.time_limit and el > args.time_limit:
            log(f"time limit reached at step {step}")
            break
    save_ckpt()
    train_time = elapsed_before + time.time() - t_train
    model.eval()
    tr_l = evaluate(model, train, args, n_batches=16)
    va_l = evaluate(model, val, args, n_batches=16)
    tokens_seen = step * args.batch * args.seq_len
    log(f"done: {step} steps, {tokens_seen} tokens seen, training wall time {train_time:.0f}s "
        f"({train_time / 60:.1f} min); final train loss {tr_l:.4f}, val loss {va_l:.4f} (no repeats inserted)")
    r = head_roles(model, tok)
    log("head roles (final model, F32):")
    log(format_roles(r))

    if args.no_export:
        return
    # ---- export ----
    out = args.out
    write_tokenizer(tok, out)
    if args.family == "llama":
        write_tokenizer_json(tok, out)
    cfg = model.hf_config(V, tok.eot) if args.family == "llama" else {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": V,
        "n_positions": args.n_positions,
        "n_ctx": args.n_positions,
        "n_embd": args.n_embd,
        "n_layer": args.n_layer,
        "n_head": args.n_head,
        "n_inner": None,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "bos_token_id": tok.eot,
        "eos_token_id": tok.eot,
        "tie_word_embeddings": True,
        "torch_dtype": "float16",
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    st_path = os.path.join(out, "model.safetensors")
    write_safetensors(st_path, model.hf_state(), "F16")

    # ---- checks ----
    ref_texts = PROBE_SENTENCES + val_docs[:200] + ["Hello,  world!\n\n  It's 2024 -- naïve café ☃ 'll've"]
    for t in ref_texts:
        a = tok.encode(t)
        b = gpt2_reference_encode(t, os.path.join(out, "vocab.json"), os.path.join(out, "merges.txt"))
        assert a == b, f"tokenizer mismatch on {t!r}"
    log(f"tokenizer check: Python BPE == GPT-2 bpe() reading vocab.json/merges.txt on {len(ref_texts)} texts")
    header, sd = read_safetensors(st_path)
    m2 = build(False)
    m2.load_hf_state(sd)
    m2.eval()
    va2 = evaluate(m2, val, args, n_batches=16)
    tr2 = evaluate(m2, train, args, n_batches=16)
    log(f"safetensors re-read ({len(sd)} tensors, F16, {os.path.getsize(st_path)} bytes): "
        f"train loss {tr2:.4f} (F32 {tr_l:.4f}), val loss {va2:.4f} (F32 {va_l:.4f})")
    r2 = head_roles(m2, tok)
    log("head roles (re-read F16 weights):")
    log(format_roles(r2))
    ca, cp, cn = copy_accuracy(m2, tok, copy_sents)
    log(f"copy accuracy (re-read F16 weights, {len(copy_sents)} sentences of {COPY_SENTENCES_FILE}, "
        f"{cn} positions): top-1 {ca:.3f}, mean probability of the next token {cp:.3f}")
    for s in copy_sents:
        a, _, n = copy_accuracy(m2, tok, [s])
        log(f"  {a:.2f} ({n}) {s}")
    for prompt in SAMPLE_PROMPTS:
        log(f"sample: {prompt!r} -> {sample(m2, tok, prompt)!r}")
    log(f"total script wall time {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    main()
