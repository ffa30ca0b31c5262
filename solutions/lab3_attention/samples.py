"""Sample submissions for Lab 3: correct variants and one per catalogued bug.

Each sample names the solution cells it replaces (by grade_id) and what the grader must conclude
(``expect``). Format: :mod:`autograder.release.sample_submissions`.
"""
from autograder.release.sample_submissions import bug_cell

LAB = "lab3_attention"

MASK_HEAD = "def causal_mask(t_q, t_k, device=None):\n"
ATTN_HEAD = "def causal_attention(q, k, v, dropout_p=0.0, training=True):\n"
SPLIT_HEAD = "def split_heads(x, n_heads):\n"
TOKEN_HEAD = "def tokenize_smiles(smiles):\n"
WEIGHTS_HEAD = "def causal_attention_weights(q, k):\n"


SAMPLES: dict[str, dict] = {
    # -- correct alternatives: full marks ---------------------------------------------------------------
    "lab3_variant_einsum_where": {"expect": {"full": True}, "cells": {
        "causal_mask": MASK_HEAD +
        "    i = torch.arange(t_q, device=device)[:, None]\n"
        "    j = torch.arange(t_k, device=device)[None, :]\n"
        "    return j <= i + (t_k - t_q)\n",
        "causal_attention": ATTN_HEAD +
        "    scores = torch.einsum('bhqd,bhkd->bhqk', q, k) * q.shape[-1] ** -0.5\n"
        "    allowed = causal_mask(q.shape[-2], k.shape[-2], device=q.device)\n"
        "    scores = torch.where(allowed, scores, torch.tensor(float('-inf'), dtype=scores.dtype))\n"
        "    weights = F.dropout(torch.softmax(scores, dim=-1), dropout_p, training)\n"
        "    return torch.einsum('bhqk,bhkd->bhqd', weights, v)\n",
        "split_heads": SPLIT_HEAD +
        "    b, t, c = x.shape\n    return x.reshape(b, t, n_heads, -1).permute(0, 2, 1, 3)\n",
        "merge_heads": "def merge_heads(x):\n    b, h, t, d = x.shape\n"
        "    return x.permute(0, 2, 1, 3).contiguous().view(b, t, h * d)\n",
    }},
    "lab3_variant_finfo_matmul": {"expect": {"full": True}, "cells": {
        "causal_attention": ATTN_HEAD +
        "    t_q, t_k = q.shape[-2], k.shape[-2]\n"
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "    future = torch.triu(torch.ones(t_q, t_k, dtype=torch.bool, device=q.device), diagonal=t_k - t_q + 1)\n"
        "    scores = scores.masked_fill(future, torch.finfo(scores.dtype).min)\n"
        "    weights = F.dropout(scores.softmax(dim=-1), p=dropout_p, training=training)\n"
        "    return weights @ v\n",
        "tokenize_smiles": TOKEN_HEAD +
        "    two = ('Cl', 'Br')\n    single = set('BCNOPSFIbcnops-=#$:/\\\\().*0123456789')\n"
        "    out, i = [], 0\n"
        "    while i < len(smiles):\n"
        "        if smiles[i] == '[':\n"
        "            j = smiles.find(']', i)\n"
        "            if j < 0 or '[' in smiles[i + 1:j] or j == i + 1:\n"
        "                raise ValueError(f'unclosed bracket atom at position {i}')\n"
        "            out.append(smiles[i:j + 1]); i = j + 1\n"
        "        elif smiles[i:i + 2] in two:\n"
        "            out.append(smiles[i:i + 2]); i += 2\n"
        "        elif smiles[i] == '%' and smiles[i + 1:i + 3].isdigit() and len(smiles[i + 1:i + 3]) == 2:\n"
        "            out.append(smiles[i:i + 3]); i += 3\n"
        "        elif smiles[i] in single:\n"
        "            out.append(smiles[i]); i += 1\n"
        "        else:\n"
        "            raise ValueError(f'unexpected character {smiles[i]!r} at position {i}')\n"
        "    return out\n",
    }},
    # weights softmaxed in float32 for half inputs, masked with finfo.min (exactly 0 after exp in float32)
    "lab3_variant_weights_finfo_float32": {"expect": {"full": True}, "cells": {
        "causal_attention_weights": WEIGHTS_HEAD +
        "    scores = torch.einsum('bhqd,bhkd->bhqk', q, k) * q.shape[-1] ** -0.5\n"
        "    t_q, t_k = scores.shape[-2:]\n"
        "    i = torch.arange(t_q, device=q.device)[:, None]\n"
        "    j = torch.arange(t_k, device=q.device)[None, :]\n"
        "    scores = scores.masked_fill(j > i + (t_k - t_q), torch.finfo(scores.dtype).min)\n"
        "    wide = torch.promote_types(scores.dtype, torch.float32)\n"
        "    return scores.softmax(dim=-1, dtype=wide).to(q.dtype)\n",
    }},
    "lab3_variant_own_mask_sdpa": {"expect": {"full": True}, "cells": {
        "causal_attention": ATTN_HEAD +
        "    mask = causal_mask(q.shape[-2], k.shape[-2], device=q.device)\n"
        "    p = dropout_p if training else 0.0\n"
        "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)\n",
        "CausalSelfAttention":
        "class CausalSelfAttention(nn.Module):\n"
        "    def __init__(self, d_model, n_heads, dropout=0.0):\n"
        "        super().__init__()\n"
        "        if d_model % n_heads != 0:\n"
        "            raise ValueError('d_model must be divisible by n_heads')\n"
        "        self.n_heads, self.dropout = n_heads, dropout\n"
        "        self.qkv = nn.Linear(d_model, 3 * d_model)\n"
        "        self.proj = nn.Linear(d_model, d_model)\n\n"
        "    def forward(self, x):\n"
        "        q, k, v = self.qkv(x).chunk(3, dim=-1)\n"
        "        q, k, v = (split_heads(z, self.n_heads) for z in (q, k, v))\n"
        "        y = causal_attention(q, k, v, dropout_p=self.dropout, training=self.training)\n"
        "        return self.proj(merge_heads(y))\n",
    }},
    # generate as a plain loop: no torch.no_grad(), probabilities in float64, the cache kept in its own branch
    "lab3_variant_generate_plain_loop": {"expect": {"full": True}, "cells": {
        "generate":
        "def generate(model, prompt_ids, max_new_tokens, use_kv_cache, temperature=1.0, generator=None):\n"
        "    out = prompt_ids.clone()\n"
        "    cache = None\n"
        "    for step in range(max_new_tokens):\n"
        "        if not use_kv_cache:\n"
        "            last = model(out)[:, -1, :]\n"
        "        elif cache is None:\n"
        "            logits, cache = model.decode(out, None)\n"
        "            last = logits[:, -1, :]\n"
        "        else:\n"
        "            logits, cache = model.decode(out[:, -1:], cache)\n"
        "            last = logits[:, -1, :]\n"
        "        if temperature == 0:\n"
        "            nxt = torch.argmax(last, dim=-1).unsqueeze(1)\n"
        "        else:\n"
        "            probs = torch.softmax(last.double() / temperature, dim=-1)\n"
        "            nxt = torch.multinomial(probs, num_samples=1, generator=generator)\n"
        "        out = torch.cat((out, nxt), dim=1)\n"
        "    return out\n",
    }},
}

BUG_SAMPLES = {
    "missing_scale": "causal_attention_weights", "softmax_over_queries": "causal_attention_weights",
    "triu_diagonal_zero": "causal_mask", "transposed_mask": "causal_mask",
    "is_causal_top_left": "causal_attention", "masked_fill_minus_1e9": "causal_attention",
    "dropout_ignores_training": "causal_attention",
    "view_heads_first": "split_heads",
    "character_level": "tokenize_smiles", "findall_drops_unmatched": "tokenize_smiles",
    "cache_fed_whole_sequence": "generate",
}
for _bug_id, _function in BUG_SAMPLES.items():
    SAMPLES[f"lab3_bug_{_bug_id}"] = {"cells": {_function: bug_cell(LAB, _bug_id)},
                                      "expect": {"full": False, "bug": _bug_id, "function": _function}}

# --- section 10: tiled attention, RoPE, grouped-query attention -----------------------------------------------
TILED_HEAD = "def tiled_attention(q, k, v, block_size, causal=True):\n"
ROPE_CACHE_HEAD = "def rope_cache(head_dim, max_pos, base=10000.0):\n"
APPLY_ROPE_HEAD = "def apply_rope(x, cos, sin, positions):\n"
GQA_HEAD = "def grouped_query_attention(q, k, v):\n"
KV_HEAD = "def kv_cache_bytes(n_layers, n_kv_heads, head_dim, dtype):\n"
RSA_HEAD = "def rotary_self_attention(x, w_q, w_kv, w_o, n_heads, cos, sin, past_kv=None):\n"

SAMPLES.update({
    # tiles walked with while loops, scores with einsum, the -inf guard as a clamp of the running max (flashinfer's)
    "lab3_variant_tiled_while_einsum": {"expect": {"full": True}, "cells": {
        "tiled_attention": TILED_HEAD +
        "    acc_dtype = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype\n"
        "    n_q, n_k, scale = q.shape[-2], k.shape[-2], 1.0 / math.sqrt(q.shape[-1])\n"
        "    out = []\n"
        "    i = 0\n"
        "    while i < n_q:\n"
        "        qi = q[:, :, i:i + block_size].to(acc_dtype)\n"
        "        rows = qi.shape[2]\n"
        "        limit = torch.arange(i, i + rows, device=q.device)[:, None] + n_k - n_q\n"
        "        run_max = torch.full(qi.shape[:3], float('-inf'), dtype=acc_dtype, device=q.device)\n"
        "        run_sum = torch.zeros(qi.shape[:3], dtype=acc_dtype, device=q.device)\n"
        "        o = torch.zeros(qi.shape, dtype=acc_dtype, device=q.device)\n"
        "        j = 0\n"
        "        while j < n_k and (not causal or j <= i + rows - 1 + n_k - n_q):\n"
        "            kj, vj = k[:, :, j:j + block_size].to(acc_dtype), v[:, :, j:j + block_size].to(acc_dtype)\n"
        "            s = torch.einsum('bhqd,bhkd->bhqk', qi, kj) * scale\n"
        "            if causal:\n"
        "                cols = torch.arange(j, j + kj.shape[2], device=q.device)[None, :]\n"
        "                s = torch.where(cols <= limit, s, torch.tensor(float('-inf'), dtype=acc_dtype))\n"
        "            new_max = torch.maximum(run_max, s.max(dim=-1).values)\n"
        "            safe = new_max.clamp(min=torch.finfo(acc_dtype).min)\n"
        "            p = torch.exp(s - safe.unsqueeze(-1))\n"
        "            corr = torch.exp(run_max - safe)\n"
        "            run_sum = corr * run_sum + p.sum(dim=-1)\n"
        "            o = corr.unsqueeze(-1) * o + torch.einsum('bhqk,bhkd->bhqd', p, vj)\n"
        "            run_max = new_max\n"
        "            j += block_size\n"
        "        out.append(o / run_sum.clamp(min=torch.finfo(acc_dtype).tiny).unsqueeze(-1))\n"
        "        i += block_size\n"
        "    return torch.cat(out, dim=2).to(q.dtype)\n",
    }},
    # RoPE through complex numbers (channel i and i + D/2 as one complex number), the cache with torch.outer
    "lab3_variant_rope_complex": {"expect": {"full": True}, "cells": {
        "rope_cache": ROPE_CACHE_HEAD +
        "    if head_dim % 2 != 0:\n"
        "        raise ValueError('head_dim must be even')\n"
        "    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).double() / head_dim))\n"
        "    freqs = torch.outer(torch.arange(max_pos).double(), inv_freq).repeat(1, 2)\n"
        "    return torch.cos(freqs), torch.sin(freqs)\n",
        "apply_rope": APPLY_ROPE_HEAD +
        "    half = x.shape[-1] // 2\n"
        "    z = torch.complex(x[..., :half].double(), x[..., half:].double())\n"
        "    turn = torch.complex(cos[positions][:, :half].double(), sin[positions][:, :half].double())\n"
        "    w = z * turn\n"
        "    return torch.cat([w.real, w.imag], dim=-1).to(x.dtype)\n",
    }},
    # grouped-query attention through SDPA's enable_gqa; the cache size from dtype.itemsize; the layer with einsum
    "lab3_variant_gqa_sdpa_einsum": {"expect": {"full": True}, "cells": {
        "grouped_query_attention": GQA_HEAD +
        "    n_heads, n_kv = q.shape[1], k.shape[1]\n"
        "    if n_heads % n_kv != 0:\n"
        "        raise ValueError(f'H = {n_heads} is not a multiple of H_kv = {n_kv}')\n"
        "    mask = causal_mask(q.shape[2], k.shape[2], device=q.device)\n"
        "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)\n",
        "kv_cache_bytes": KV_HEAD +
        "    return int(n_layers * n_kv_heads * head_dim * 2 * dtype.itemsize)\n",
        "rotary_self_attention": RSA_HEAD +
        "    B, T, C = x.shape\n"
        "    D = C // n_heads\n"
        "    q = torch.einsum('btc,ec->bte', x, w_q).reshape(B, T, n_heads, D).permute(0, 2, 1, 3)\n"
        "    keys, values = torch.einsum('btc,ec->bte', x, w_kv).chunk(2, dim=-1)\n"
        "    k = keys.reshape(B, T, -1, D).permute(0, 2, 1, 3)\n"
        "    v = values.reshape(B, T, -1, D).permute(0, 2, 1, 3)\n"
        "    start = past_kv[0].shape[-2] if past_kv is not None else 0\n"
        "    pos = torch.arange(start, start + T, device=x.device)\n"
        "    q, k = apply_rope(q, cos, sin, pos), apply_rope(k, cos, sin, pos)\n"
        "    if past_kv is not None:\n"
        "        k = torch.cat((past_kv[0], k), dim=-2)\n"
        "        v = torch.cat((past_kv[1], v), dim=-2)\n"
        "    att = grouped_query_attention(q, k, v)\n"
        "    y = torch.einsum('btc,ec->bte', att.permute(0, 2, 1, 3).reshape(B, T, C), w_o)\n"
        "    return y, (k, v)\n",
    }},
})
NEW_BUGS = {"accumulator_not_rescaled": "tiled_attention", "fully_masked_row_nan": "tiled_attention",
            "rope_pairs_interleaved": "apply_rope", "kv_heads_tiled": "grouped_query_attention",
            "rope_offset_forgotten": "rotary_self_attention"}
for _bug_id, _function in NEW_BUGS.items():
    SAMPLES[f"lab3_bug_{_bug_id}"] = {"cells": {_function: bug_cell(LAB, _bug_id)},
                                      "expect": {"full": False, "bug": _bug_id, "function": _function}}

# The reference student hands in every lab (its folder is shared with Labs 1 and 2).
SAMPLES["reference"] = {"cells": {}, "expect": {"full": True}}

# The reference causal_attention is built on causal_attention_weights, and rotary_self_attention on apply_rope and
# grouped_query_attention: a bug there costs both functions' tests.
DEPENDS = {"causal_attention": ["causal_attention_weights"],
           "rotary_self_attention": ["apply_rope", "grouped_query_attention"]}

# -- issue 41: what the text leaves free, and the dtypes it pins -------------------------------------------------
# generate with the Gumbel-max trick: the next token is argmax(logits / T + Gumbel noise), whose law is the softmax's;
# the uniform draws come from `generator` (torch.rand), not from torch.multinomial. The text leaves which random numbers
# are drawn free; the tests read frequencies and reproducibility only
SAMPLES["lab3_variant_generate_gumbel"] = {"expect": {"full": True}, "cells": {
    "generate":
    "def generate(model, prompt_ids, max_new_tokens, use_kv_cache, temperature=1.0, generator=None):\n"
    "    ids, past = prompt_ids, None\n"
    "    with torch.no_grad():\n"
    "        for _ in range(max_new_tokens):\n"
    "            if use_kv_cache:\n"
    "                logits, past = model.decode(ids if past is None else ids[:, -1:], past)\n"
    "            else:\n"
    "                logits = model(ids)\n"
    "            last = logits[:, -1].double()\n"
    "            if temperature == 0:\n"
    "                nxt = last.argmax(dim=-1, keepdim=True)\n"
    "            else:\n"
    "                u = torch.rand(last.shape, generator=generator, dtype=torch.float64).clamp_min(1e-300)\n"
    "                nxt = (last / temperature - torch.log(-torch.log(u))).argmax(dim=-1, keepdim=True)\n"
    "            ids = torch.cat([ids, nxt], dim=1)\n"
    "    return ids\n",
}}
# "accumulate in float32" applied to every dtype, and only half inputs cast back: float64 inputs give a float32 result,
# which check_close alone lets pass against a float64 expectation (the text pins q's dtype)
SAMPLES["lab3_bug_tiled_float32_for_float64"] = {"expect": {"failed_tests": ["tiled_attention_value"]}, "cells": {
    "tiled_attention": TILED_HEAD +
    "    t_q, t_k, dtype = q.shape[-2], k.shape[-2], q.dtype\n"
    "    q, k, v = q.float() / math.sqrt(q.shape[-1]), k.float(), v.float()   # float32 sums, whatever the dtype\n"
    "    out = []\n"
    "    for qs in range(0, t_q, block_size):\n"
    "        qb = q[..., qs:qs + block_size, :]\n"
    "        last = torch.arange(qs, qs + qb.shape[-2]) + (t_k - t_q)\n"
    "        m = torch.full(qb.shape[:-1], -math.inf)\n"
    "        l, acc = torch.zeros_like(m), torch.zeros_like(qb)\n"
    "        stop = min(t_k, int(last[-1]) + 1) if causal else t_k\n"
    "        for ks in range(0, stop, block_size):\n"
    "            s = qb @ k[..., ks:ks + block_size, :].transpose(-2, -1)\n"
    "            if causal:\n"
    "                s = s.masked_fill(torch.arange(ks, ks + s.shape[-1]) > last[:, None], -math.inf)\n"
    "            m_new = torch.maximum(m, s.amax(-1))\n"
    "            shift = torch.where(m_new == -math.inf, 0.0, m_new)\n"
    "            p, rescale = (s - shift[..., None]).exp(), (m - shift).exp()\n"
    "            l = l * rescale + p.sum(-1)\n"
    "            acc = acc * rescale[..., None] + p @ v[..., ks:ks + block_size, :]\n"
    "            m = m_new\n"
    "        out.append(acc / torch.where(l > 0, l, 1.0)[..., None])\n"
    "    o = torch.cat(out, dim=-2)\n"
    "    return o.to(dtype) if dtype in (torch.float16, torch.bfloat16) else o   # float64 comes back float32\n",
}}
# RoPE written inline with rope_cache's float64 tables: the rotated keys come out float64 and are cached so; only the
# attention's inputs are cast back. The text states the cache in x's dtype (a float32 x gives a float32 cache)
SAMPLES["lab3_bug_rotary_cache_in_table_dtype"] = {"expect": {"failed_tests": ["rotary_self_attention_value"]}, "cells": {
    "rotary_self_attention": RSA_HEAD +
    "    b, t, c = x.shape\n"
    "    d = c // n_heads\n"
    "    q = (x @ w_q.T).view(b, t, n_heads, d).transpose(1, 2)\n"
    "    k, v = (x @ w_kv.T).view(b, t, 2, -1, d).permute(2, 0, 3, 1, 4)\n"
    "    start = 0 if past_kv is None else past_kv[0].shape[2]\n"
    "    pos = torch.arange(start, start + t)\n"
    "\n"
    "    def rotate(z):\n"
    "        half = z.shape[-1] // 2\n"
    "        return z * cos[pos] + torch.cat([-z[..., half:], z[..., :half]], dim=-1) * sin[pos]   # the tables' dtype\n"
    "\n"
    "    q, k = rotate(q), rotate(k)\n"
    "    if past_kv is not None:\n"
    "        k, v = torch.cat([past_kv[0], k], dim=2), torch.cat([past_kv[1], v], dim=2)\n"
    "    y = grouped_query_attention(q.to(x.dtype), k.to(x.dtype), v.to(x.dtype))\n"
    "    return y.transpose(1, 2).reshape(b, t, c) @ w_o.T, (k, v)\n",
}}
